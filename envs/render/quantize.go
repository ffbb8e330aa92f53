package render

import (
	"fmt"
	"image"
	"image/color"
	"slices"
)

// A quantizer maps a full-colour frame onto a palette of at most 256 colours (GIF's limit): a
// median cut of the frame's own colours, then white and black for the caption. Each frame
// gets its own palette (a GIF local colour table, 768 bytes), so that a colour that appears
// later in an episode (a body turning to the light) is kept as well as those of the first
// frame; MuJoCo's scenes change little from frame to frame, and so do their cuts. Frames are
// not dithered: dithering would make flat regions noisy, change them from frame to frame and
// leave LZW little to compress; a median cut's 254 colours leave faint bands in the sky's
// gradient instead.
type quantizer struct {
	pal   color.Palette
	lut   []uint8 // palette index of each colour of the frame, cut to binBits a channel
	hist  []cell  // the histogram, all zero between frames
	cells []cell  // the frame's occupied bins
}

// Indices of the caption's colours in a quantizer's palette: the last two.
const capColours = 2

// binBits is the bits a channel keeps in the histogram: 6 (64 levels) keeps a gradient's
// steps finer than 5 would, where a large smooth region (the sky) gets many boxes.
const binBits = 6

const binMask = 1<<binBits - 1

// bin is a colour cut to binBits a channel: r, g, b from the high bits down.
func bin(r, g, b uint8) int {
	const shift = 8 - binBits
	return int(r>>shift)<<(2*binBits) | int(g>>shift)<<binBits | int(b>>shift)
}

// cell is one occupied bin of the histogram: how many pixels, and their summed colour (a
// frame of up to 2^31/255 pixels: 8.4 million).
type cell struct {
	key, n     int32
	sr, sg, sb int32
}

func newQuantizer() *quantizer {
	return &quantizer{lut: make([]uint8, 1<<(3*binBits)), hist: make([]cell, 1<<(3*binBits))}
}

// cut makes q's palette for img: its colours cut into at most 254 boxes (Heckbert's median
// cut on the histogram: the box with the most pixels that can still be split is split at its
// pixels' median along its widest channel), each box's colour being its pixels' mean, then
// white and black. A frame of more than 8.4 million pixels is refused (its sums would
// overflow the cells).
func (q *quantizer) cut(img *image.RGBA) error {
	b := img.Rect
	if b.Dx()*b.Dy() > 1<<31/255 {
		return fmt.Errorf("render: a %d×%d frame: at most %d pixels are filmed", b.Dx(), b.Dy(), 1<<31/255)
	}
	for y := range b.Dy() {
		row := img.Pix[y*img.Stride : y*img.Stride+4*b.Dx()]
		for x := 0; x < len(row); x += 4 {
			c := &q.hist[bin(row[x], row[x+1], row[x+2])]
			c.n++
			c.sr += int32(row[x])
			c.sg += int32(row[x+1])
			c.sb += int32(row[x+2])
		}
	}
	q.cells = q.cells[:0]
	for k := range q.hist {
		if c := &q.hist[k]; c.n > 0 {
			c.key = int32(k)
			q.cells = append(q.cells, *c)
			*c = cell{}
		}
	}
	boxes := [][]cell{q.cells}
	for len(boxes) < 256-capColours {
		i := splittable(boxes)
		if i < 0 {
			break
		}
		lo, hi := split(boxes[i])
		boxes[i] = lo
		boxes = append(boxes, hi)
	}
	q.pal = q.pal[:0:0] // a new palette: the last frame's belongs to the GIF writer's frame
	for _, bx := range boxes {
		var n, sr, sg, sb int
		for _, c := range bx {
			n, sr, sg, sb = n+int(c.n), sr+int(c.sr), sg+int(c.sg), sb+int(c.sb)
		}
		for _, c := range bx { // each of the frame's colours maps to its box
			q.lut[c.key] = uint8(len(q.pal))
		}
		q.pal = append(q.pal, color.RGBA{uint8(sr / n), uint8(sg / n), uint8(sb / n), 255})
	}
	q.pal = append(q.pal, color.RGBA{255, 255, 255, 255}, color.RGBA{0, 0, 0, 255})
	return nil
}

// channel is the value of channel ch (0 red, 1 green, 2 blue) of a bin.
func channel(key int32, ch int) int { return int(key) >> ((2 - ch) * binBits) & binMask }

// splittable returns the box with the most pixels among those holding more than one bin, or −1.
func splittable(boxes [][]cell) int {
	best, most := -1, 0
	for i, bx := range boxes {
		if len(bx) < 2 {
			continue
		}
		n := 0
		for _, c := range bx {
			n += int(c.n)
		}
		if n > most {
			best, most = i, n
		}
	}
	return best
}

// split cuts a box of at least two bins in two along its widest channel at its pixels' median.
func split(bx []cell) (lo, hi []cell) {
	ch, width := 0, -1
	for c := range 3 {
		mn, mx := binMask, 0
		for _, x := range bx {
			v := channel(x.key, c)
			mn, mx = min(mn, v), max(mx, v)
		}
		if mx-mn > width {
			ch, width = c, mx-mn
		}
	}
	slices.SortFunc(bx, func(a, b cell) int { return channel(a.key, ch) - channel(b.key, ch) })
	total := 0
	for _, x := range bx {
		total += int(x.n)
	}
	k, acc := 1, int(bx[0].n)
	for k < len(bx)-1 && 2*acc < total {
		acc += int(bx[k].n)
		k++
	}
	return bx[:k:k], bx[k:]
}

// apply writes the colours of src, the frame q was cut from, into dst (of src's size, over
// q.pal) through the lookup table.
func (q *quantizer) apply(dst *image.Paletted, src *image.RGBA) {
	w, h := src.Rect.Dx(), src.Rect.Dy()
	for y := range h {
		s := src.Pix[y*src.Stride : y*src.Stride+4*w]
		d := dst.Pix[y*dst.Stride : y*dst.Stride+w]
		for x := range d {
			d[x] = q.lut[bin(s[4*x], s[4*x+1], s[4*x+2])]
		}
	}
}
