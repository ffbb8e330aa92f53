package atomicfile_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/towerrl/towerrl/internal/atomicfile"
)

// ExampleWrite streams a file into place; a write that fails leaves the previous file.
func ExampleWrite() {
	dir, err := os.MkdirTemp("", "atomicfile-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "config.json")

	write := func(v any) error {
		return atomicfile.Write(path, 0o644, func(w io.Writer) error {
			return json.NewEncoder(w).Encode(v)
		})
	}
	if err := write(map[string]int{"seed": 1}); err != nil {
		log.Fatal(err)
	}
	err = write(map[string]any{"bad": func() {}}) // json cannot encode a func
	var unsupported *json.UnsupportedTypeError
	fmt.Println("second write failed:", errors.As(err, &unsupported))

	b, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s", b)
	fmt.Println("files:", len(entries))
	// Output:
	// second write failed: true
	// {"seed":1}
	// files: 1
}
