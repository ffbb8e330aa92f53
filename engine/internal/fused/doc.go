// Package fused holds the pieces of towerrl's fused gorgonia loss ops — one op per tower that
// computes a whole RL loss and every input's derivative in one pass over the rows, instead of
// dozens of small ops (engine/ppo, engine/internal/vtraceloss): a policy head's per-row
// log-probability and entropy with their gradients ([Head], over package models/head's
// distribution maths), the gradient op each input's derivative goes through ([GradOp]), the
// gorgonia boilerplate an op embeds ([Op]: arity, type, shapes, hash, input values, gradient
// ops; the op adds String and Do), and small helpers.
//
// Errors carry no package prefix (the op that uses these pieces adds its own context), but
// for [Op]'s, which gorgonia returns as they are: they start with the prefix its op gives.
//
// Threading: every value belongs to one op, in one tower's graph, run by one goroutine.
package fused
