package render

import (
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
	pal color.Palette
	lut [1 << 15]uint8 // palette index of each colour of the frame, cut to 5 bits a channel
}

// Indices of the caption's colours in a quantizer's palette: the last two.
const capColours = 2

// bin is a colour cut to 5 bits a channel: r<<10 | g<<5 | b.
func bin(r, g, b uint8) int { return int(r>>3)<<10 | int(g>>3)<<5 | int(b>>3) }

// cell is one occupied bin of the histogram: how many pixels, and their summed colour.
type cell struct {
	key        int
	n          int
	sr, sg, sb int
}

// newQuantizer cuts img's colours into at most 254 boxes (Heckbert's median cut on the
// 15-bit histogram: the box with the most pixels that can still be split is split at its
// pixels' median along its widest channel), each box's colour being its pixels' mean.
func newQuantizer(img *image.RGBA) *quantizer {
	var hist [1 << 15]cell
	b := img.Rect
	for y := b.Min.Y; y < b.Max.Y; y++ {
		row := img.Pix[(y-b.Min.Y)*img.Stride : (y-b.Min.Y)*img.Stride+4*b.Dx()]
		for x := 0; x < len(row); x += 4 {
			c := &hist[bin(row[x], row[x+1], row[x+2])]
			c.n++
			c.sr += int(row[x])
			c.sg += int(row[x+1])
			c.sb += int(row[x+2])
		}
	}
	var cells []cell
	for k, c := range hist {
		if c.n > 0 {
			c.key = k
			cells = append(cells, c)
		}
	}
	boxes := [][]cell{cells}
	for len(boxes) < 256-capColours {
		i := splittable(boxes)
		if i < 0 {
			break
		}
		lo, hi := split(boxes[i])
		boxes[i] = lo
		boxes = append(boxes, hi)
	}
	q := &quantizer{}
	for _, bx := range boxes {
		var n, sr, sg, sb int
		for _, c := range bx {
			n, sr, sg, sb = n+c.n, sr+c.sr, sg+c.sg, sb+c.sb
		}
		for _, c := range bx { // each of the frame's colours maps to its box
			q.lut[c.key] = uint8(len(q.pal))
		}
		q.pal = append(q.pal, color.RGBA{uint8(sr / n), uint8(sg / n), uint8(sb / n), 255})
	}
	q.pal = append(q.pal, color.RGBA{255, 255, 255, 255}, color.RGBA{0, 0, 0, 255})
	return q
}

// channel is the 5-bit value of channel ch (0 red, 1 green, 2 blue) of a bin.
func channel(key, ch int) int { return key >> (10 - 5*ch) & 31 }

// splittable returns the box with the most pixels among those holding more than one bin, or −1.
func splittable(boxes [][]cell) int {
	best, most := -1, 0
	for i, bx := range boxes {
		if len(bx) < 2 {
			continue
		}
		n := 0
		for _, c := range bx {
			n += c.n
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
		mn, mx := 31, 0
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
		total += x.n
	}
	k, acc := 1, bx[0].n
	for k < len(bx)-1 && 2*acc < total {
		acc += bx[k].n
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
