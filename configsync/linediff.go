package configsync

import (
	"bytes"

	udiff "github.com/aymanbagabas/go-udiff"
)

// diffContext is the number of unchanged lines shown around each change.
const diffContext = 2

// DiffText returns a unified diff of a and b (labelled aName and bName, two
// lines of context around each change), or "" when they are equal.
func DiffText(aName, bName string, a, b []byte) string {
	if bytes.Equal(a, b) {
		return ""
	}
	edits := udiff.Lines(string(a), string(b))
	text, err := udiff.ToUnified(aName, bName, string(a), edits, diffContext)
	if err != nil {
		// Lines computed the edits from a itself, so they always apply.
		panic("configsync: inconsistent diff: " + err.Error())
	}
	return text
}
