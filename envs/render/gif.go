package render

import (
	"bufio"
	"compress/lzw"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
)

// GIF writes an animated GIF (GIF89a, looping forever) frame by frame, so that an episode of
// any length takes the memory of one frame: the header and the palette first, then each frame
// as it comes, compressed at once. Frames are the size given to NewGIF, over its palette.
type GIF struct {
	w             *bufio.Writer
	width, height int
	delay         int // hundredths of a second per frame
	pal           color.Palette
	bits          int // the colour table has 2^bits entries
	frames        int
	closed        bool
}

// NewGIF writes the header of a width × height animation over Palette shown at fps frames per
// second (as near as GIF's hundredths of a second allow) to w.
func NewGIF(w io.Writer, width, height, fps int) (*GIF, error) {
	return NewGIFPalette(w, width, height, fps, Palette)
}

// NewGIFPalette is NewGIF with frames over pal (2 to 256 colours; its first is the background).
func NewGIFPalette(w io.Writer, width, height, fps int, pal color.Palette) (*GIF, error) {
	if fps < 1 || fps > 100 {
		return nil, fmt.Errorf("render: a GIF at %d frames per second: want 1 to 100", fps)
	}
	return newGIF(w, width, height, delayOf(fps), pal)
}

// delayOf is the nearest whole number of hundredths of a second to a frame at fps.
func delayOf(fps int) int { return (100 + fps/2) / fps }

// newGIF writes the header of a GIF whose frames are shown for delay hundredths of a second,
// over pal, or with nil, each over its own palette (a local colour table: Frame writes img's).

// tableBits is the bits of a colour table for n colours: 2^bits ≥ n, at least 1.
func tableBits(n int) int {
	bits := 1
	for 1<<bits < n {
		bits++
	}
	return bits
}

// writeTable writes pal as a colour table of 2^bits entries (black after pal's colours).
func writeTable(b *bufio.Writer, pal color.Palette, bits int) {
	for i := range 1 << bits {
		r, gr, bl := uint8(0), uint8(0), uint8(0)
		if i < len(pal) {
			r32, g32, b32, _ := pal[i].RGBA()
			r, gr, bl = uint8(r32>>8), uint8(g32>>8), uint8(b32>>8)
		}
		b.Write([]byte{r, gr, bl})
	}
}

func newGIF(w io.Writer, width, height, delay int, pal color.Palette) (*GIF, error) {
	if pal != nil && (len(pal) < 2 || len(pal) > 256) {
		return nil, fmt.Errorf("render: a GIF palette of %d colours: want 2 to 256", len(pal))
	}
	if width < 1 || height < 1 || width > 65535 || height > 65535 {
		return nil, fmt.Errorf("render: a GIF of %d×%d pixels: want sizes from 1 to 65535", width, height)
	}
	if delay < 1 || delay > 65535 {
		return nil, fmt.Errorf("render: a GIF frame shown for %d hundredths of a second: want 1 to 65535", delay)
	}
	g := &GIF{w: bufio.NewWriter(w), width: width, height: height, delay: delay, pal: pal}
	b := g.w
	b.WriteString("GIF89a")
	le16(b, width)
	le16(b, height)
	if pal == nil {
		b.Write([]byte{0x70, 0, 0}) // no global colour table; 8 bits per primary colour; no aspect ratio
	} else {
		// Global colour table of 2^bits entries (the field holds bits − 1), 8 bits per
		// primary colour in the source.
		g.bits = tableBits(len(pal))
		b.WriteByte(0x80 | 0x70 | byte(g.bits-1))
		b.WriteByte(0) // background colour: the palette's first
		b.WriteByte(0) // pixel aspect ratio: none given
		writeTable(b, pal, g.bits)
	}
	// NETSCAPE2.0 application extension: loop forever.
	b.Write([]byte{0x21, 0xff, 0x0b})
	b.WriteString("NETSCAPE2.0")
	b.Write([]byte{0x03, 0x01, 0x00, 0x00, 0x00})
	return g, nil
}

// Frame appends img, which must be the GIF's size and hold indices into the GIF's palette (a
// GIF made with none: into img's own, 2 to 256 colours, written as the frame's colour table).
func (g *GIF) Frame(img *image.Paletted) error {
	if g.closed {
		return errors.New("render: GIF already closed")
	}
	pal, bits, local := g.pal, g.bits, g.pal == nil
	if local {
		if pal = img.Palette; len(pal) < 2 || len(pal) > 256 {
			return fmt.Errorf("render: a frame palette of %d colours: want 2 to 256", len(pal))
		}
		bits = tableBits(len(pal))
	}
	if img.Rect.Dx() != g.width || img.Rect.Dy() != g.height {
		return fmt.Errorf("render: a %d×%d frame in a %d×%d GIF", img.Rect.Dx(), img.Rect.Dy(), g.width, g.height)
	}
	b := g.w
	// Graphic control extension: no disposal, the frame's delay, no transparency.
	b.Write([]byte{0x21, 0xf9, 0x04, 0x00})
	le16(b, g.delay)
	b.Write([]byte{0x00, 0x00})
	// Image descriptor: the whole screen, not interlaced, the global colour table or the
	// frame's own after it.
	b.WriteByte(0x2c)
	le16(b, 0)
	le16(b, 0)
	le16(b, g.width)
	le16(b, g.height)
	if local {
		b.WriteByte(0x80 | byte(bits-1))
		writeTable(b, pal, bits)
	} else {
		b.WriteByte(0)
	}
	litWidth := max(2, bits) // LZW minimum code size: bits per colour index (GIF's least is 2)
	b.WriteByte(byte(litWidth))
	blocks := &subBlocks{w: b}
	z := lzw.NewWriter(blocks, lzw.LSB, litWidth)
	for y := range g.height {
		row := img.Pix[y*img.Stride : y*img.Stride+g.width]
		for _, c := range row {
			if int(c) >= len(pal) {
				return fmt.Errorf("render: colour index %d outside the palette of %d", c, len(pal))
			}
		}
		if _, err := z.Write(row); err != nil {
			return err
		}
	}
	if err := z.Close(); err != nil {
		return err
	}
	if err := blocks.flush(); err != nil {
		return err
	}
	b.WriteByte(0) // block terminator
	g.frames++
	return nil
}

// Frames is the number of frames written.
func (g *GIF) Frames() int { return g.frames }

// Close writes the trailer and flushes; it does not close the underlying writer.
func (g *GIF) Close() error {
	if g.closed {
		return nil
	}
	g.closed = true
	if g.frames == 0 {
		return errors.New("render: a GIF needs at least one frame")
	}
	g.w.WriteByte(0x3b)
	return g.w.Flush()
}

func le16(b *bufio.Writer, v int) { b.Write([]byte{byte(v), byte(v >> 8)}) }

// subBlocks cuts the LZW stream into GIF's data sub-blocks of at most 255 bytes, each led by
// its length.
type subBlocks struct {
	w   *bufio.Writer
	buf [255]byte
	n   int
}

func (s *subBlocks) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		k := copy(s.buf[s.n:], p)
		s.n += k
		p = p[k:]
		if s.n == len(s.buf) {
			if err := s.flush(); err != nil {
				return total - len(p), err
			}
		}
	}
	return total, nil
}

func (s *subBlocks) flush() error {
	if s.n == 0 {
		return nil
	}
	s.w.WriteByte(byte(s.n))
	_, err := s.w.Write(s.buf[:s.n])
	s.n = 0
	return err
}
