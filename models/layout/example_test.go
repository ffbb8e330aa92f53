package layout_test

import (
	"fmt"
	"os"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Stable-Baselines3's documented export outputs actions, values and log-probabilities; the
// logits it samples from are an inner tensor, which Expose makes an output.
func ExampleRecognise() {
	data, err := os.ReadFile("../../testdata/foreign/sb3_ppo_cartpole.onnx")
	if err != nil {
		fmt.Println(err)
		return
	}
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(data, m); err != nil {
		fmt.Println(err)
		return
	}
	cartPole := head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}}
	b, err := layout.Recognise(m, nil, cartPole, layout.Overrides{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(b.Family, b.Head)
	fmt.Printf("logits %s, value %s, actions %s\n", b.Params, b.Value, b.Actions)
	exposed, b, err := layout.Expose(m, b)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range exposed.GetGraph().GetOutput() {
		fmt.Print(o.GetName(), " ")
	}
	fmt.Println()
	// Output:
	// sb3 categorical
	// logits /policy/action_net/Gemm_output_0, value 23, actions 50
	// 50 23 48 /policy/action_net/Gemm_output_0
}
