#!/usr/bin/env python3
"""Write a copy of a CUDA shared library whose embedded GPU code keeps one architecture only.

    python3 scripts/fatbin_keep.py --arch 90 IN.so OUT.so

A CUDA library carries, in its ELF section .nv_fatbin, one fat binary per compiled source
file, each holding the same kernels as machine code (cubin) for several GPU architectures.
ONNX Runtime 1.29's CUDA provider plugin (230 MB) holds sm_75, 80, 86, 89, 90 and 120: the
H200 (sm_90) loads only the sm_90 entries. This script zeroes the payload of every other
entry in each fat binary that has an entry for --arch, and leaves each entry's header, every
offset and the file's size as they were, so the zeros compress to nothing: the plugin
travels to the GPU machine in one call (about 40 MB with zstd) instead of four. A fat binary
with no entry for --arch is copied as it is. Only standard-library Python; prints what it
kept as JSON on stdout.

The layout read here (container magic 0xBA55ED50, 16-byte container header, entries of kind
1 = PTX, 2 = cubin with a 64-byte header naming the architecture) is the one cuobjdump lists;
the script refuses a file it does not parse exactly to the end of the section.
"""
import argparse
import json
import struct
import sys

MAGIC = 0xBA55ED50


def sections(data):
    """The ELF64 little-endian section table as {name: (offset, size)}."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = raw[shstrndx][4]
    out = {}
    for name, _typ, _flags, _addr, offset, size in raw:
        end = data.index(b"\0", strtab + name)
        out[data[strtab + name:end].decode()] = (offset, size)
    return out


def keep_arch(data, arch):
    """Zeroes, in place, the payloads of the entries of other architectures; returns counts."""
    secs = sections(data)
    if ".nv_fatbin" not in secs:
        raise ValueError("no .nv_fatbin section: not a CUDA library")
    start, size = secs[".nv_fatbin"]
    pos, end_sec = start, start + size
    stats = {"containers": 0, "kept_entries": 0, "zeroed_entries": 0, "kept_bytes": 0,
             "zeroed_bytes": 0, "containers_without_arch": 0}
    while pos < end_sec:
        magic, _ver, hsize, fsize = struct.unpack_from("<IHHQ", data, pos)
        if magic != MAGIC:
            if data[pos:pos + 8] == bytes(8):  # alignment padding between containers
                pos += 8
                continue
            raise ValueError("unexpected bytes at offset %#x in .nv_fatbin" % pos)
        stats["containers"] += 1
        entries, e, end = [], pos + hsize, pos + hsize + fsize
        while e < end:
            kind, _u, ehsize, esize = struct.unpack_from("<HHIQ", data, e)
            if kind not in (1, 2) or ehsize < 32:
                raise ValueError("unexpected fat binary entry (kind %d) at offset %#x" % (kind, e))
            entries.append((e, kind, ehsize, esize, struct.unpack_from("<I", data, e + 28)[0]))
            e += ehsize + esize
        if e != end:
            raise ValueError("fat binary at offset %#x does not end where its header says" % pos)
        if not any(a == arch and k == 2 for _, k, _, _, a in entries):
            stats["containers_without_arch"] += 1
        else:
            for off, _kind, ehsize, esize, a in entries:
                if a == arch:
                    stats["kept_entries"] += 1
                    stats["kept_bytes"] += esize
                else:
                    data[off + ehsize:off + ehsize + esize] = bytes(esize)
                    stats["zeroed_entries"] += 1
                    stats["zeroed_bytes"] += esize
        pos = end
    return stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", type=int, default=90, help="architecture to keep, e.g. 90 for sm_90 (default)")
    ap.add_argument("input")
    ap.add_argument("output")
    args = ap.parse_args()
    data = bytearray(open(args.input, "rb").read())
    try:
        stats = keep_arch(data, args.arch)
    except ValueError as e:
        sys.exit("fatbin_keep: %s: %s" % (args.input, e))
    if stats["kept_entries"] == 0:
        sys.exit("fatbin_keep: %s has no sm_%d code" % (args.input, args.arch))
    with open(args.output, "wb") as f:
        f.write(data)
    stats["arch"] = args.arch
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
