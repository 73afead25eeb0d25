package slacksim_test

import (
	"testing"

	"github.com/countersign/countersign/slacksim"
)

func TestIsLoopbackHost(t *testing.T) {
	tests := []struct {
		host string
		want bool
	}{
		{"127.0.0.1", true},
		{"127.0.0.1:3000", true},
		{"localhost:3000", true},
		{"LOCALHOST", true},
		{"localhost.:3000", true},
		{"[::1]:3000", true},
		{"[::1]", true},
		{"attacker.example", false},
		{"attacker.example:3000", false},
		{"127.0.0.1.attacker.example", false},
		{"localhost.attacker.example:3000", false},
		{"10.0.0.1:3000", false},
		{"0.0.0.0:3000", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := slacksim.IsLoopbackHost(tt.host); got != tt.want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
}
