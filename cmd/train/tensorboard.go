package main

import "flag"

// noTensorBoard is --no-tensorboard: engine.Options.NoTensorBoard.
var noTensorBoard = flag.Bool("no-tensorboard", false, "write no TensorBoard event files (events.out.tfevents.*, CleanRL's tags) into the run directory; see docs/watching.md")
