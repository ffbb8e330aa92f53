// Command-line tools live in the sub-directories of cmd: train, batcher, eval and infer.
// They parse flags, read environment variables and set up logging; all logic is in the library.
package cmd
