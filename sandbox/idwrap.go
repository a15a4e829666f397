package sandbox

import (
	"fmt"
	"strings"
)

// WrapID is err as "sandbox ID: err", unless err's text names id already:
// a message names its sandbox once ("sandbox sb-1: sandbox \"sb-1\": not
// found" tells the user nothing twice). nil stays nil.
func WrapID(id string, err error) error {
	if err == nil || id == "" || strings.Contains(err.Error(), id) {
		return err
	}
	return fmt.Errorf("sandbox %s: %w", id, err)
}

// WrapIDf is fmt.Errorf(format+": %w", args..., err), the context of an
// operation on sandbox id, unless err's text names id already: then err
// alone says it (a server's or a runtime's message names its sandbox),
// and the id is not said twice. nil stays nil.
func WrapIDf(id string, err error, format string, args ...any) error {
	if err == nil || id != "" && strings.Contains(err.Error(), id) {
		return err
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}
