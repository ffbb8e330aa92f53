package render

import (
	"bufio"
	"compress/lzw"
	"errors"
	"fmt"
	"image"
	"io"
)

// GIF writes an animated GIF (GIF89a, looping forever) frame by frame, so that an episode of
// any length takes the memory of one frame: the header and Palette first, then each frame as
// it comes, compressed at once. Frames are the size given to NewGIF, over Palette.
type GIF struct {
	w             *bufio.Writer
	width, height int
	delay         int // hundredths of a second per frame
	frames        int
	closed        bool
}

// NewGIF writes the header of a width × height animation shown at fps frames per second (as
// near as GIF's hundredths of a second allow) to w.
func NewGIF(w io.Writer, width, height, fps int) (*GIF, error) {
	if width < 1 || height < 1 || width > 65535 || height > 65535 {
		return nil, fmt.Errorf("render: a GIF of %d×%d pixels: want sizes from 1 to 65535", width, height)
	}
	if fps < 1 || fps > 100 {
		return nil, fmt.Errorf("render: a GIF at %d frames per second: want 1 to 100", fps)
	}
	g := &GIF{w: bufio.NewWriter(w), width: width, height: height, delay: (100 + fps/2) / fps}
	b := g.w
	b.WriteString("GIF89a")
	le16(b, width)
	le16(b, height)
	// Global colour table of 2^(n+1) entries, n = 2: 8 colours (Palette's), 8 bits per
	// primary colour in the source.
	b.WriteByte(0x80 | 0x70 | tableBits)
	b.WriteByte(0) // background colour: white
	b.WriteByte(0) // pixel aspect ratio: none given
	for i := range 1 << (tableBits + 1) {
		r, gr, bl := uint8(0), uint8(0), uint8(0)
		if i < len(Palette) {
			r32, g32, b32, _ := Palette[i].RGBA()
			r, gr, bl = uint8(r32>>8), uint8(g32>>8), uint8(b32>>8)
		}
		b.Write([]byte{r, gr, bl})
	}
	// NETSCAPE2.0 application extension: loop forever.
	b.Write([]byte{0x21, 0xff, 0x0b})
	b.WriteString("NETSCAPE2.0")
	b.Write([]byte{0x03, 0x01, 0x00, 0x00, 0x00})
	return g, nil
}

// tableBits sizes the colour table: 2^(tableBits+1) ≥ len(Palette).
const tableBits = 2

// Frame appends img, which must be the GIF's size and hold Palette's indices.
func (g *GIF) Frame(img *image.Paletted) error {
	if g.closed {
		return errors.New("render: GIF already closed")
	}
	if img.Rect.Dx() != g.width || img.Rect.Dy() != g.height {
		return fmt.Errorf("render: a %d×%d frame in a %d×%d GIF", img.Rect.Dx(), img.Rect.Dy(), g.width, g.height)
	}
	b := g.w
	// Graphic control extension: no disposal, the frame's delay, no transparency.
	b.Write([]byte{0x21, 0xf9, 0x04, 0x00})
	le16(b, g.delay)
	b.Write([]byte{0x00, 0x00})
	// Image descriptor: the whole screen, the global colour table, not interlaced.
	b.WriteByte(0x2c)
	le16(b, 0)
	le16(b, 0)
	le16(b, g.width)
	le16(b, g.height)
	b.WriteByte(0)
	const litWidth = tableBits + 1 // LZW minimum code size: bits per colour index
	b.WriteByte(litWidth)
	blocks := &subBlocks{w: b}
	z := lzw.NewWriter(blocks, lzw.LSB, litWidth)
	for y := range g.height {
		row := img.Pix[y*img.Stride : y*img.Stride+g.width]
		for _, c := range row {
			if int(c) >= len(Palette) {
				return fmt.Errorf("render: colour index %d outside the palette of %d", c, len(Palette))
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
