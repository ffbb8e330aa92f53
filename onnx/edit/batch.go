package edit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// DefaultTolerance is the agreement DynamicBatch's verification asks of every output element
// when Options.Tolerance is zero.
const DefaultTolerance = 1e-5

// Options tunes [DynamicBatch]. The zero value is usable.
type Options struct {
	// Config configures the ONNX Runtime sessions DynamicBatch runs (library, threads; Shapes
	// fixes dynamic dimensions other than the batch, as for a Session). Provider is ignored:
	// they run on the CPU, whose results for a row do not depend on the batch it runs in (GPU
	// kernels may choose algorithms by batch size), so verification compares like with like.
	// Default: the zero Config.
	Config onnx.Config
	// BatchAxes gives the batch axis of graph inputs by name; a negative value marks an input
	// without a batch dimension. Default: found by the analysis — each input's dimensions equal
	// to the fixed batch are candidates, dimension 0 first (so a recurrent state shaped
	// [layers, batch, hidden] is found when a recurrent node needs its batch on axis 1). The
	// fixed batch is the first input's dimension on its batch axis (0 unless given here).
	BatchAxes map[string]int
	// Rows is the number of rows K the verification runs: the original in batches of its fixed
	// size, the rewritten model on all K at once and on each row alone. It must be a multiple
	// of the fixed batch. Default: max(4, 2·batch), rounded up to a multiple of the batch.
	Rows int
	// Inputs gives the verification's data by input name: the whole input for Rows rows, in
	// the input's own layout (its batch axis holding Rows), converted to its element type; an
	// input without a batch dimension takes its whole tensor. Inputs not named get random
	// values: floats uniform in [-1, 1), uint8 in 0..255, other integers 0 or 1.
	Inputs map[string][]float64
	// Seed seeds the random inputs. Default 0.
	Seed uint64
	// Tolerance bounds |rewritten − original| ≤ Tolerance·max(1, |original|) for every
	// floating-point output element; integer outputs must be equal. Default [DefaultTolerance].
	Tolerance float64
}

// Report says what DynamicBatch did.
type Report struct {
	// Dynamic: the model's batch was already dynamic and the model is returned unchanged.
	Dynamic bool
	// Batch is the fixed batch the model was exported with (0 when Dynamic).
	Batch int
	// Inputs and Outputs give the batch axis of each batched graph input and output.
	Inputs, Outputs map[string]int
	// Rewrites lists every change, one line each.
	Rewrites []string
	// Assumed lists operators the analysis does not know whose handling of the batch was
	// assumed; the verification confirmed it.
	Assumed []string
	// Rows is the number of rows verified; MaxDiff the largest absolute difference found
	// between the rewritten model's outputs and the original's.
	Rows    int
	MaxDiff float64
}

func (r Report) String() string {
	switch {
	case r.Dynamic:
		return "batch already dynamic; model unchanged"
	case r.Rows == 0:
		return fmt.Sprintf("fixed batch %d kept", r.Batch)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "fixed batch %d made dynamic (verified on %d rows, max difference %.3g)", r.Batch, r.Rows, r.MaxDiff)
	for _, line := range r.Rewrites {
		b.WriteString("\n  " + line)
	}
	for _, line := range r.Assumed {
		b.WriteString("\n  assumed: " + line)
	}
	return b.String()
}

// Bounds on the search over ambiguous decisions.
const (
	maxAnalyses      = 1024
	maxVerifications = 4
)

// DynamicBatch rewrites a model whose batch dimension is fixed so that the batch is dynamic,
// verifies the rewrite against the original, and returns the new model with a report. A model
// whose batch is already dynamic (some input's batch dimension is not a fixed number) is
// returned unchanged with Report.Dynamic set. When the batch cannot be freed, or the rewritten
// model does not reproduce the original row by row, the error wraps [ErrFixedBatch] and says
// why; the caller can then run the original at its fixed batch. Errors running the original
// model itself (ONNX Runtime missing, a model it cannot load) do not wrap ErrFixedBatch.
func DynamicBatch(ctx context.Context, model []byte, opts Options) ([]byte, Report, error) {
	if opts.Rows < 0 || opts.Tolerance < 0 || math.IsNaN(opts.Tolerance) {
		return dynamicBatch(ctx, model, nil, opts) // refuses the options first
	}
	m, err := parse(model)
	if err != nil {
		return nil, Report{}, err
	}
	return dynamicBatch(ctx, model, m, opts)
}

// DynamicBatchModel is DynamicBatch for a model parsed and checked once by onnx.Parse, whose
// message it reads without modifying: the bytes are not parsed again.
func DynamicBatchModel(ctx context.Context, model *onnx.Model, opts Options) ([]byte, Report, error) {
	if opset(model.Proto()) == 0 {
		return nil, Report{}, fmt.Errorf("%w: the model imports no version of the default ONNX operator set", onnx.ErrModel)
	}
	return dynamicBatch(ctx, model.Bytes(), model.Proto(), opts)
}

// dynamicBatch is DynamicBatch for model parsed as m, which it does not modify.
func dynamicBatch(ctx context.Context, model []byte, m *onnxpb.ModelProto, opts Options) ([]byte, Report, error) {
	var r Report
	var err error
	opts.Config.Provider = onnx.ProviderCPU
	if opts.Rows < 0 || opts.Tolerance < 0 || math.IsNaN(opts.Tolerance) {
		return nil, r, fmt.Errorf("edit: Options.Rows (%d) and Options.Tolerance (%g) must not be negative", opts.Rows, opts.Tolerance)
	}
	ix := newIndex(m)
	batch, dynamic, err := fixedBatch(ix, opts.BatchAxes)
	if err != nil {
		return nil, r, err
	}
	if dynamic {
		r.Dynamic = true
		return slices.Clone(model), r, nil
	}
	r.Batch = int(batch)
	rows := int64(opts.Rows)
	if rows == 0 {
		rows = max(4, 2*batch)
		rows = (rows + batch - 1) / batch * batch
	}
	if rows%batch != 0 {
		return nil, r, fmt.Errorf("edit: Options.Rows is %d, not a multiple of the model's fixed batch %d", rows, batch)
	}
	forced := map[string]int{}
	inShapes := map[string][]int64{}
	for _, vi := range ix.inputs {
		name := vi.GetName()
		if inShapes[name], err = concreteShape(vi, none, batch, opts.Config.Shapes); err != nil {
			return nil, r, err
		}
		if ax, ok := opts.BatchAxes[name]; ok {
			forced[name] = max(ax, none)
			if ax >= 0 && inShapes[name][ax] != batch {
				return nil, r, fmt.Errorf("edit: Options.BatchAxes[%q] is %d, but that dimension of the input is %d, not the fixed batch %d (from the first input)",
					name, ax, inShapes[name][ax], batch)
			}
		}
	}
	for name := range opts.Inputs {
		if _, ok := inShapes[name]; !ok {
			return nil, r, fmt.Errorf("edit: Options.Inputs names %q, which is not an input of the graph", name)
		}
	}
	observed, err := observe(ctx, m, ix, nil, 0, opts.Config)
	if err != nil {
		return nil, r, fmt.Errorf("edit: running the model at its fixed batch: %w", err)
	}

	c := &chooser{}
	var firstErr, verifyErr error
	verified := 0
	for range maxAnalyses {
		if err := ctx.Err(); err != nil {
			return nil, r, err
		}
		p, err := analyse(ix, batch, inShapes, observed, forced, c)
		var culprits []int // nil: any decision may be at fault
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			var se *siteError
			if errors.As(err, &se) {
				culprits = se.sites
			}
		} else {
			for _, vi := range m.GetGraph().GetOutput() {
				if s, ok := observed[vi.GetName()]; ok && len(s) == 0 && p.axes[vi.GetName()] == none {
					return nil, r, fmt.Errorf("%w: output %q is a scalar (rank 0) without a batch, which onnx.Session cannot return", onnx.ErrShape, vi.GetName())
				}
			}
			out, notes := apply(m, p)
			v, err := verify(ctx, vectorOutputs(m, observed), out, p, batch, rows, opts)
			if err == nil {
				data, err := marshal(out)
				if err != nil {
					return nil, r, err
				}
				r.Inputs, r.Outputs = p.inputs, map[string]int{}
				for _, vi := range out.GetGraph().GetOutput() {
					if ax := p.axes[vi.GetName()]; ax != none {
						r.Outputs[vi.GetName()] = ax
					}
				}
				r.Rewrites, r.Assumed, r.Rows, r.MaxDiff = notes, p.assumed, int(rows), v
				return data, r, nil
			}
			if !errors.Is(err, errMismatch) {
				return nil, r, err
			}
			if verifyErr == nil {
				verifyErr = err
			}
			if verified++; verified == maxVerifications {
				break
			}
		}
		if !c.next(culprits) {
			break
		}
	}
	cause := verifyErr
	if cause == nil {
		cause = firstErr
	}
	return nil, r, fmt.Errorf("%w (exported with batch %d): %w; run it %s", ErrFixedBatch, batch, cause, perCall(batch))
}

func perCall(batch int64) string {
	if batch == 1 {
		return "one row per call"
	}
	return fmt.Sprintf("%d rows per call", batch)
}

// fixedBatch finds the model's fixed batch: the first input's dimension on its batch axis. dynamic
// reports that some input's batch dimension is not a fixed number.
func fixedBatch(ix *graphIndex, axes map[string]int) (batch int64, dynamic bool, err error) {
	if len(ix.inputs) == 0 {
		return 0, false, fmt.Errorf("%w: the graph has no inputs", ErrFixedBatch)
	}
	for name := range axes {
		if !slices.ContainsFunc(ix.inputs, func(vi *onnxpb.ValueInfoProto) bool { return vi.GetName() == name }) {
			return 0, false, fmt.Errorf("edit: Options.BatchAxes names %q, which is not an input of the graph", name)
		}
	}
	for _, vi := range ix.inputs {
		name := vi.GetName()
		d := dims(vi)
		ax, given := axes[name]
		if !given && len(d) == 0 || ax < 0 {
			continue
		}
		if ax >= len(d) {
			return 0, false, fmt.Errorf("edit: Options.BatchAxes[%q] is %d, but the input has rank %d", name, ax, len(d))
		}
		if d[ax] < 0 {
			return 0, true, nil
		}
		if batch == 0 {
			batch = d[ax]
		}
	}
	if batch <= 0 {
		return 0, false, fmt.Errorf("%w: no graph input has a batch dimension", ErrFixedBatch)
	}
	return batch, false, nil
}

// vectorOutputs returns m with its scalar outputs (rank 0, which a Session cannot return)
// reshaped to one element, under the same names; m itself when it has none.
func vectorOutputs(m *onnxpb.ModelProto, observed map[string][]int64) *onnxpb.ModelProto {
	var scalars []*onnxpb.ValueInfoProto
	for _, vi := range m.GetGraph().GetOutput() {
		if s, ok := observed[vi.GetName()]; ok && len(s) == 0 {
			scalars = append(scalars, vi)
		}
	}
	if len(scalars) == 0 {
		return m
	}
	out := proto.Clone(m).(*onnxpb.ModelProto)
	ix := newIndex(out)
	g := out.GetGraph()
	for _, vi := range g.GetOutput() {
		if _, ok := observed[vi.GetName()]; !ok || len(observed[vi.GetName()]) != 0 {
			continue
		}
		name := vi.GetName()
		inner, one := ix.fresh(name+"/scalar"), ix.fresh(name+"/one")
		for _, n := range g.GetNode() {
			for k := range n.Input {
				if n.Input[k] == name {
					n.Input[k] = inner
				}
			}
			for k := range n.Output {
				if n.Output[k] == name {
					n.Output[k] = inner
				}
			}
		}
		g.Node = append(g.Node,
			&onnxpb.NodeProto{Name: proto.String(ix.fresh(one + "/Constant")), OpType: proto.String("Constant"), Output: []string{one},
				Attribute: []*onnxpb.AttributeProto{{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(),
					T: intTensor(one, tInt64, []int64{1}, []int64{1})}}},
			&onnxpb.NodeProto{Name: proto.String(ix.fresh(name + "/Reshape")), OpType: proto.String("Reshape"), Input: []string{inner, one}, Output: []string{name}})
		if tt := vi.GetType().GetTensorType(); tt != nil {
			tt.Shape = &onnxpb.TensorShapeProto{Dim: []*onnxpb.TensorShapeProto_Dimension{
				{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: 1}}}}
		}
	}
	return out
}

// verify runs the original on rows rows, batch at a time, and the rewritten model on all rows
// at once and on each row alone, and compares every output. It returns the largest difference.
// Errors caused by the rewrite wrap errMismatch.
func verify(ctx context.Context, orig, out *onnxpb.ModelProto, p *plan, batch, rows int64, opts Options) (float64, error) {
	tol := opts.Tolerance
	if tol == 0 {
		tol = DefaultTolerance
	}
	ro, err := openRunner(ctx, orig, newIndex(orig), nil, 0, opts.Config)
	if err != nil {
		return 0, fmt.Errorf("edit: running the original model: %w", err)
	}
	defer ro.close()
	// Inputs for all rows.
	rng := rand.New(rand.NewPCG(opts.Seed, 0x7e57ba7c4))
	full := map[string]*tensor{}
	for _, info := range ro.inputs {
		shape := slices.Clone(ro.shapes[info.Name])
		ax, batched := p.inputs[info.Name]
		if batched {
			shape[ax] = rows
		}
		if vals, ok := opts.Inputs[info.Name]; ok {
			if int64(len(vals)) != prod(shape) {
				return 0, fmt.Errorf("edit: Options.Inputs[%q] holds %d values; the input takes %d (shape %v for %d rows)", info.Name, len(vals), prod(shape), shape, rows)
			}
			full[info.Name] = givenTensor(info.DType, shape, vals)
		} else {
			full[info.Name] = randomTensor(info.DType, shape, rng)
		}
	}
	slice := func(lo, hi int64) map[string]*tensor {
		feeds := map[string]*tensor{}
		for name, t := range full {
			if ax, ok := p.inputs[name]; ok {
				t = t.take(ax, int(lo), int(hi))
			}
			feeds[name] = t
		}
		return feeds
	}
	// The original, one batch at a time.
	var chunks []map[string]*tensor
	for lo := int64(0); lo < rows; lo += batch {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		res, err := ro.run(slice(lo, lo+batch))
		if err != nil {
			return 0, fmt.Errorf("edit: running the original model: %w", err)
		}
		chunks = append(chunks, res)
	}
	// want returns the original's output for all rows, joined on the batch axis; an output
	// whose batch a Squeeze took away (batch 1) gets it back, as the rewritten model keeps it.
	want := func(name string, rank int) (*tensor, error) {
		ax := p.axes[name]
		if ax == none {
			return chunks[0][name], nil
		}
		parts := make([]*tensor, len(chunks))
		for k, c := range chunks {
			parts[k] = c[name]
			if len(parts[k].shape)+1 == rank && batch == 1 && ax <= len(parts[k].shape) {
				parts[k] = &tensor{dt: parts[k].dt, shape: slices.Insert(slices.Clone(parts[k].shape), ax, 1), f: parts[k].f, i: parts[k].i}
			}
			if ax >= len(parts[k].shape) || parts[k].shape[ax] != batch || !slices.Equal(parts[k].shape, parts[0].shape) {
				return nil, fmt.Errorf("%w: output %q of the original has shape %v, not the batch %d on axis %d", errMismatch, name, c[name].shape, batch, ax)
			}
		}
		return join(parts, ax), nil
	}
	worst := 0.0
	check := func(got map[string]*tensor, n, row int64) error {
		for _, o := range ro.outputs {
			g, ok := got[o.Name]
			if !ok {
				return fmt.Errorf("%w: output %q is missing", errMismatch, o.Name)
			}
			w, err := want(o.Name, len(g.shape))
			if err != nil {
				return err
			}
			if ax := p.axes[o.Name]; ax != none && n == 1 && ax < len(w.shape) {
				w = w.take(ax, int(row), int(row)+1)
			}
			d, bad := compare(w, g, tol)
			if bad != "" {
				where := fmt.Sprintf("all %d rows at once", n)
				if n == 1 {
					where = fmt.Sprintf("row %d alone", row)
				}
				return fmt.Errorf("%w: output %q, %s: %s (tolerance %g)", errMismatch, o.Name, where, bad, tol)
			}
			worst = max(worst, d)
		}
		return nil
	}
	ixOut := newIndex(out)
	for _, n := range []int64{rows, 1} {
		rr, err := openRunner(ctx, out, ixOut, p.inputs, n, opts.Config)
		if err != nil {
			if ctx.Err() != nil {
				return 0, err
			}
			return 0, fmt.Errorf("%w: ONNX Runtime refuses the rewritten model at a batch of %d: %v", errMismatch, n, err)
		}
		for lo := int64(0); lo < rows; lo += n {
			if err := ctx.Err(); err != nil {
				rr.close()
				return 0, err
			}
			got, err := rr.run(slice(lo, lo+n))
			if err == nil {
				err = check(got, n, lo)
			} else {
				err = fmt.Errorf("%w: running the rewritten model on a batch of %d: %v", errMismatch, n, err)
			}
			if err != nil {
				rr.close()
				return 0, err
			}
		}
		if err := rr.close(); err != nil {
			return 0, err
		}
	}
	return worst, nil
}
