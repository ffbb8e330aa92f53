package remote

import (
	"crypto/sha256"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// modelWeights splits a policy the learner published into its weights — the float32
// initializers of rank ≥ 1, in graph order — and the rest (graph, other initializers), which
// a digest stands for. Two versions with the same rest differ only in their weights, so a
// remote batcher swaps the second in place (batcher.Batcher.Publish: the sessions read new
// weights between two steps) instead of building new sessions from it.
type modelWeights struct {
	names []string
	sizes []int
	flat  []float32
	rest  [sha256.Size]byte
}

// readWeights reads model's weights and the digest of the rest.
func readWeights(model []byte) (modelWeights, error) {
	m, err := onnx.Parse(model)
	if err != nil {
		return modelWeights{}, fmt.Errorf("remote: reading the policy's weights: %w", err)
	}
	return weightsOf(m)
}

// weightsOf is readWeights for a model parsed once (onnx.Parse), which it does not modify.
func weightsOf(model *onnx.Model) (modelWeights, error) {
	var w modelWeights
	m := proto.Clone(model.Proto()).(*onnxpb.ModelProto) // the digest's copy, values left out
	for _, t := range m.GetGraph().GetInitializer() {
		if onnxpb.TensorProto_DataType(t.GetDataType()) != onnxpb.TensorProto_FLOAT || len(t.GetDims()) == 0 {
			continue
		}
		n := 1
		for _, d := range t.GetDims() {
			n *= int(d)
		}
		w.names, w.sizes = append(w.names, t.GetName()), append(w.sizes, n)
		t.RawData, t.FloatData = nil, nil // the rest's digest leaves the values out
	}
	values, err := model.WeightValues(w.names)
	if err != nil {
		return w, err
	}
	w.flat = slices.Concat(values...)
	m.MetadataProps, m.ModelVersion = nil, nil // they change with every version (towerrl.version)
	rest, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return w, fmt.Errorf("remote: digesting the policy's graph: %w", err)
	}
	w.rest = sha256.Sum256(rest)
	return w, nil
}

// layout is the weights' place in the flat vector Batcher.Publish takes.
func (w modelWeights) layout() []bind.Param { return bind.ContiguousParams(w.names, w.sizes) }

// sameLayout reports whether v is w with other weight values.
func (w modelWeights) sameLayout(v modelWeights) bool {
	return w.rest == v.rest && slices.Equal(w.names, v.names) && slices.Equal(w.sizes, v.sizes)
}
