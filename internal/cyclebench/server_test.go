package cyclebench

import (
	"testing"
	"time"
)

func TestParseServer(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:9.000000\r\n\r\n" +
		"# Commandstats\r\ncmdstat_evalsha:calls=7,usec=700,usec_per_call=100.00,rejected_calls=0,failed_calls=1\r\n" +
		"cmdstat_hset:calls=30,usec=45,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseServer(info)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ServerCounts{CPU: 3750 * time.Millisecond, Runs: 37}); got != want {
		t.Errorf("parseServer = %+v, want %+v (children's CPU is not the server's)", got, want)
	}
	cpu, runs := perCycle(ServerCounts{CPU: time.Second, Runs: 10}, got, 10)
	if cpu != 275*time.Millisecond || runs != 2.7 {
		t.Errorf("perCycle = %v, %v; want 275ms, 2.7", cpu, runs)
	}
	if _, err := parseServer("used_cpu_user:lots\r\n"); err == nil {
		t.Error("a CPU time that is not a number was read")
	}
}
