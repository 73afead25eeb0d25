package graph

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Reducer merges the values that several nodes of one step gave a field of
// the state. Make one with Reduce or Append and declare it with
// Builder.AddReducer.
type Reducer struct {
	typ   reflect.Type
	merge func(base any, changed []any) any
}

// Reduce makes a Reducer of fn, which gets the field's value before the
// step and the values of the nodes that changed it, in merge order.
func Reduce[F any](fn func(base F, changed []F) F) Reducer {
	return Reducer{
		typ: reflect.TypeFor[F](),
		merge: func(base any, changed []any) any {
			vals := make([]F, len(changed))
			for i, c := range changed {
				vals[i] = c.(F)
			}
			return fn(base.(F), vals)
		},
	}
}

// Append is the reducer of a slice that nodes only append to (a
// conversation's messages): the result is the slice before the step
// followed by what each node appended, in merge order.
func Append[E any]() Reducer {
	return Reduce(func(base []E, changed [][]E) []E {
		out := slices.Clone(base)
		for _, c := range changed {
			if len(c) > len(base) {
				out = append(out, c[len(base):]...)
			}
		}
		return out
	})
}

// MergeError says which fields nodes of one step changed in different ways
// without a reducer to merge them. The step fails with it.
type MergeError struct {
	// Fields name each field and the nodes that changed it, e.g.
	// "Answer (changed by bar, baz)".
	Fields []string
}

func (e *MergeError) Error() string {
	return fmt.Sprintf("conflicting changes to %s; declare a reducer with AddReducer", strings.Join(e.Fields, "; "))
}

// merge combines the states the nodes of a step (in order) left, field by
// field: a field no node changed keeps its value; one changed by a single
// node, or to the same value by several, takes that value; one changed by
// several goes through its reducer, and without one the step fails with a
// *MergeError.
func (g *Graph[S]) merge(base *S, order []string, states map[string]*S) (S, error) {
	out := *base
	bv := reflect.ValueOf(base).Elem()
	ov := reflect.ValueOf(&out).Elem()
	if bv.Kind() != reflect.Struct {
		v, who := changedValues(bv, order, func(n string) reflect.Value { return reflect.ValueOf(states[n]).Elem() })
		if len(v) > 0 && !allEqual(v) {
			return out, &MergeError{Fields: []string{fmt.Sprintf("the state (changed by %s)", strings.Join(who, ", "))}}
		}
		if len(v) > 0 {
			ov.Set(v[0])
		}
		return out, nil
	}
	var conflicts []string
	t := bv.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		vals, who := changedValues(bv.Field(i), order, func(n string) reflect.Value { return reflect.ValueOf(states[n]).Elem().Field(i) })
		red, hasReducer := g.reducers[f.Name]
		switch {
		case len(vals) == 0:
		case hasReducer:
			changed := make([]any, len(vals))
			for j, v := range vals {
				changed[j] = v.Interface()
			}
			ov.Field(i).Set(reflect.ValueOf(red.merge(bv.Field(i).Interface(), changed)))
		case allEqual(vals):
			ov.Field(i).Set(vals[0])
		default:
			conflicts = append(conflicts, fmt.Sprintf("%s (changed by %s)", f.Name, strings.Join(who, ", ")))
		}
	}
	if len(conflicts) > 0 {
		return out, &MergeError{Fields: conflicts}
	}
	return out, nil
}

// changedValues returns the values of the nodes whose value differs from
// base, and the nodes.
func changedValues(base reflect.Value, order []string, value func(string) reflect.Value) ([]reflect.Value, []string) {
	var vals []reflect.Value
	var who []string
	for _, n := range order {
		v := value(n)
		if !reflect.DeepEqual(v.Interface(), base.Interface()) {
			vals, who = append(vals, v), append(who, n)
		}
	}
	return vals, who
}

func allEqual(vals []reflect.Value) bool {
	for _, v := range vals[1:] {
		if !reflect.DeepEqual(v.Interface(), vals[0].Interface()) {
			return false
		}
	}
	return true
}
