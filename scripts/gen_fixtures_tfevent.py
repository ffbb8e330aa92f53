#!/usr/bin/python3
"""Write the TensorBoard event file fixture of package internal/tfevent with the official
protocol buffer runtime, from TensorBoard's own .proto files.

    /usr/bin/python3 scripts/gen_fixtures_tfevent.py

Needs Debian's python3-protobuf and protobuf-compiler (protoc); no TensorBoard, no TensorFlow.
The .proto files are TensorBoard's (tensorboard/compat/proto, committed under
internal/tfevent/testdata/proto); protoc compiles them to Python in a temporary folder.

Writes into internal/tfevent/testdata/:
    reference.tfevents  six events, each a TFRecord (length, masked CRC-32C of the length, the
                        serialised Event, masked CRC-32C of it): the file_version event; the text
                        summary "hyperparameters" as TensorBoard's text plugin builds it; two
                        scalar events as TensorFlow 2's tf.summary.scalar builds them (a float32
                        scalar tensor with the "scalars" plugin); an image (Summary.Image); and a
                        scalar as PyTorch's SummaryWriter writes it (simple_value)
    reference.json      what each event holds, for the Go test to compare its decoder with
The Go test decodes the file, and writes the first five events with tfevent.Writer and compares
the bytes.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(ROOT, "internal", "tfevent", "testdata")
PROTO = os.path.join(TESTDATA, "proto")


def compile_protos():
    out = tempfile.mkdtemp()
    files = sorted(
        os.path.join(PROTO, "tensorboard", "compat", "proto", f)
        for f in os.listdir(os.path.join(PROTO, "tensorboard", "compat", "proto"))
        if f.endswith(".proto")
    )
    subprocess.run(["protoc", "-I", PROTO, "--python_out=" + out] + files, check=True)
    sys.path.insert(0, out)


def crc32c(data):
    """CRC-32C (Castagnoli), reflected polynomial 0x82F63B78, with a table."""
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data):
    head = struct.pack("<Q", len(data))
    return head + struct.pack("<I", masked(head)) + data + struct.pack("<I", masked(data))


def main():
    compile_protos()
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

    def plugin(name):
        return summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=name))

    def scalar(tag, v):  # tf.summary.scalar's value
        return summary_pb2.Summary.Value(
            tag=tag,
            tensor=tensor_pb2.TensorProto(
                dtype=types_pb2.DT_FLOAT, tensor_shape=tensor_shape_pb2.TensorShapeProto(), tensor_content=struct.pack("<f", v)
            ),
            metadata=plugin("scalars"),
        )

    wall = 1700000000.25
    table = '|param|value|\n|-|-|\n|env|"CartPole-v1"|\n|lr|0.00025|'
    gif = b"GIF89a\x02\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00;"
    events = [
        event_pb2.Event(wall_time=wall, file_version="brain.Event:2"),
        event_pb2.Event(
            wall_time=wall,
            summary=summary_pb2.Summary(
                value=[
                    summary_pb2.Summary.Value(
                        tag="hyperparameters",
                        tensor=tensor_pb2.TensorProto(
                            dtype=types_pb2.DT_STRING,
                            tensor_shape=tensor_shape_pb2.TensorShapeProto(),
                            string_val=[table.encode()],
                        ),
                        metadata=plugin("text"),
                    )
                ]
            ),
        ),
        event_pb2.Event(
            wall_time=wall + 1.5,
            step=512,
            summary=summary_pb2.Summary(value=[scalar("charts/episodic_return", 22.25), scalar("losses/approx_kl", 1.5e-4)]),
        ),
        event_pb2.Event(wall_time=wall + 2, step=300_000_000_000, summary=summary_pb2.Summary(value=[scalar("charts/SPS", -3.0)])),
        event_pb2.Event(
            wall_time=wall + 3,
            step=1024,
            summary=summary_pb2.Summary(
                value=[
                    summary_pb2.Summary.Value(
                        tag="episode",
                        image=summary_pb2.Summary.Image(height=1, width=2, colorspace=3, encoded_image_string=gif),
                    )
                ]
            ),
        ),
        event_pb2.Event(
            wall_time=wall + 4, step=2048, summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="x", simple_value=0.5)])
        ),
    ]
    with open(os.path.join(TESTDATA, "reference.tfevents"), "wb") as f:
        for e in events:
            f.write(record(e.SerializeToString()))

    described = []
    for e in events:
        d = {"wall": e.wall_time, "step": e.step, "file_version": e.file_version, "values": []}
        for v in e.summary.value:
            x = {"tag": v.tag, "plugin": v.metadata.plugin_data.plugin_name}
            kind = v.WhichOneof("value")
            if kind == "tensor" and v.tensor.dtype == types_pb2.DT_FLOAT:
                x["scalar"] = struct.unpack("<f", v.tensor.tensor_content)[0]
            elif kind == "tensor":
                x["text"] = v.tensor.string_val[0].decode()
            elif kind == "simple_value":
                x["scalar"] = v.simple_value
            elif kind == "image":
                x["image"] = [v.image.width, v.image.height, v.image.colorspace, v.image.encoded_image_string.hex()]
            d["values"].append(x)
        described.append(d)
    with open(os.path.join(TESTDATA, "reference.json"), "w") as f:
        json.dump(described, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
