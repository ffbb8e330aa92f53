package graph_test

import (
	"fmt"
	"os"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/onnx/graph"
)

// Two towers over one set of weights, one gradient each, and the weights written back.
func Example() {
	data, err := os.ReadFile("../../testdata/mlp_tanh.onnx")
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := graph.Parse(data)
	if err != nil {
		fmt.Println(err)
		return
	}
	params := m.NewParams()
	for tower := range 2 {
		gr, err := m.Build(G.NewGraph(), params, 8)
		if err != nil {
			fmt.Println(err)
			return
		}
		// A stand-in for a loss: it must depend on every parameter handed to G.Grad.
		logits, _ := gr.Output("logits")
		value, _ := gr.Output("value")
		mv, _ := G.Mean(value)
		ml, _ := G.Mean(logits)
		cost, _ := G.Add(mv, ml)
		if _, err := G.Grad(cost, gr.Learnables()...); err != nil {
			fmt.Println(err)
			return
		}
		vm := G.NewTapeMachine(gr.ExprGraph(), G.BindDualValues(gr.Learnables()...))
		obs := tensor.New(tensor.WithShape(8, 4), tensor.Of(tensor.Float32))
		G.Let(gr.Inputs()[0], obs)
		if err := vm.RunAll(); err != nil {
			fmt.Println(err)
			return
		}
		w, _ := gr.Param("critic.4.bias")
		grad, _ := w.Grad()
		fmt.Printf("tower %d: d mean(value) / d critic.4.bias = %v\n", tower, grad.Data())
		vm.Close()
	}
	fmt.Println("untied:", m.Untied()["actor.0.bias"])
	out, err := m.WriteBack(params, graph.WriteOptions{BumpVersion: true})
	fmt.Println(len(out) > 0, err)
	// Output:
	// tower 0: d mean(value) / d critic.4.bias = [1]
	// tower 1: d mean(value) / d critic.4.bias = [1]
	// untied: critic.0.bias
	// true <nil>
}

// Build computes the tensors asked for, inner ones included, and only what they need; the
// normaliser's statistics baked into the graph stay frozen.
func ExampleModel_Build_innerTensors() {
	data, err := os.ReadFile("../../testdata/graph_vecnormalize.onnx")
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := graph.Parse(data)
	if err != nil {
		fmt.Println(err)
		return
	}
	// The actor's hidden layer (an inner tensor) and the value; the logits branch is pruned.
	outs := []string{"/pi/pi.1/Tanh_output_0", "value"}
	params, err := m.NewParamsFor(graph.TrainOptions{Outputs: outs})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("frozen:", params.Frozen())
	gr, err := m.Build(G.NewGraph(), params, 4, outs...)
	if err != nil {
		fmt.Println(err)
		return
	}
	hidden, _ := gr.Output("/pi/pi.1/Tanh_output_0")
	fmt.Println("hidden:", hidden.Shape(), "learnables:", len(gr.Learnables()))
	_, err = m.Build(G.NewGraph(), params, 4, "/pi/pi.1/Tanh")
	fmt.Println(err)
	// Output:
	// frozen: [obs_rms_mean pi.2.weight pi.2.bias onnx::Div_28]
	// hidden: (4, 16) learnables: 6
	// graph: no such tensor: "/pi/pi.1/Tanh"; the nearest tensor names the graph has are "/pi/pi.1/Tanh_output_0", "/pi/pi.0/Gemm_output_0", "/Div_output_0", "/Sub_output_0", "/Clip_output_0", "/vf/vf.1/Tanh_output_0", "/Constant_output_0", "/Constant_1_output_0"; name a graph output ("logits", "value") or an inner tensor ([Model.Tensors] lists them)
}
