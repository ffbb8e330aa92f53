// Package learner trains policy graphs: sample batches, towers (one graph per device) that split
// each minibatch, gradient averaging through a collective, optimisers, and the asynchronous
// learner loop that keeps tower stacks loaded. It never steps environments.
package learner
