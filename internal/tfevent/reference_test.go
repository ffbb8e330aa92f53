package tfevent_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/towerrl/towerrl/internal/tfevent"
	"github.com/towerrl/towerrl/internal/tfevent/tfeventtest"
)

// refEvent is an event of testdata/reference.json, as the official protocol buffer runtime
// read it (scripts/gen_fixtures_tfevent.py).
type refEvent struct {
	Wall        float64 `json:"wall"`
	Step        int64   `json:"step"`
	FileVersion string  `json:"file_version"`
	Values      []struct {
		Tag    string   `json:"tag"`
		Plugin string   `json:"plugin"`
		Scalar *float32 `json:"scalar"`
		Text   *string  `json:"text"`
		Image  []any    `json:"image"` // width, height, colorspace, hex bytes
	} `json:"values"`
}

// TestPythonReference decodes the event file the official protocol buffer runtime wrote from
// TensorBoard's .proto files, compares it with what that runtime says it holds, and writes the
// same events with Writer: the bytes must be the same.
func TestPythonReference(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "reference.tfevents"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := os.ReadFile(filepath.Join("testdata", "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref []refEvent
	if err := json.Unmarshal(js, &ref); err != nil {
		t.Fatal(err)
	}
	recs, err := tfeventtest.Records(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(ref) {
		t.Fatalf("%d records, reference.json describes %d", len(recs), len(ref))
	}
	for i, r := range recs {
		e, err := tfeventtest.Decode(r)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		want := ref[i]
		if e.Wall != want.Wall || e.Step != want.Step || e.FileVersion != want.FileVersion || len(e.Values) != len(want.Values) {
			t.Errorf("event %d: %+v, want %+v", i, e, want)
			continue
		}
		for j, v := range e.Values {
			w := want.Values[j]
			if v.Tag != w.Tag || v.Plugin != w.Plugin {
				t.Errorf("event %d value %d: tag %q plugin %q, want %q %q", i, j, v.Tag, v.Plugin, w.Tag, w.Plugin)
			}
			switch {
			case w.Scalar != nil:
				if x, err := v.Scalar(); err != nil || x != *w.Scalar {
					t.Errorf("event %d value %d: scalar %v, %v; want %v", i, j, x, err, *w.Scalar)
				}
			case w.Text != nil:
				if d := cmp.Diff([]string{*w.Text}, v.StringVal); d != "" || v.DType != 7 {
					t.Errorf("event %d value %d: text (-want +got):\n%s", i, j, d)
				}
			case w.Image != nil:
				enc, _ := hex.DecodeString(w.Image[3].(string))
				if v.Width != int(w.Image[0].(float64)) || v.Height != int(w.Image[1].(float64)) ||
					v.Colorspace != int(w.Image[2].(float64)) || !bytes.Equal(v.Encoded, enc) {
					t.Errorf("event %d value %d: image %+v, want %v", i, j, v, w.Image)
				}
			}
		}
	}

	// The first five events, written by Writer.
	dir := t.TempDir()
	w, err := tfevent.Create(dir, wallTime(ref[0].Wall))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Text(wallTime(ref[1].Wall), 0, "hyperparameters", *ref[1].Values[0].Text); err != nil {
		t.Fatal(err)
	}
	for _, e := range ref[2:4] {
		var vs []tfevent.Scalar
		for _, v := range e.Values {
			vs = append(vs, tfevent.Scalar{Tag: v.Tag, Value: float64(*v.Scalar)})
		}
		if err := w.Scalars(wallTime(e.Wall), e.Step, vs); err != nil {
			t.Fatal(err)
		}
	}
	im := ref[4].Values[0].Image
	enc, _ := hex.DecodeString(im[3].(string))
	if err := w.Image(wallTime(ref[4].Wall), ref[4].Step, "episode", int(im[0].(float64)), int(im[1].(float64)), int(im[2].(float64)), enc); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs[:5] {
		n += len(r) + 16
	}
	if !bytes.Equal(got, data[:n]) {
		t.Errorf("Writer wrote\n%q\nthe protocol buffer runtime\n%q", got, data[:n])
	}
}
