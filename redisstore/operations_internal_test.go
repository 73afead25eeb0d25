package redisstore

import (
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestEveryScriptOfTheStoreHasAnOperation: the bot's Redis metrics label
// each of the Store's scripts with what it is for, none with "other" —
// the saves that end a session among them, two of a turn's six round
// trips.
func TestEveryScriptOfTheStoreHasAnOperation(t *testing.T) {
	t.Parallel()
	s := reflect.ValueOf(New(redis.NewClient(&redis.Options{}), Options{})).Elem()
	scriptType := reflect.TypeFor[*redis.Script]()
	for i := range s.NumField() {
		if s.Field(i).Type() != scriptType {
			continue
		}
		script := (*redis.Script)(s.Field(i).UnsafePointer())
		cmd := redis.NewCmd(t.Context(), "evalsha", script.Hash(), 0)
		if op := Operation(cmd); op == OpOther {
			t.Errorf("Operation(the Store's %s) = %q; want what it is for", s.Type().Field(i).Name, op)
		}
	}
}
