package configsync

import (
	"bytes"
	"fmt"
	"strings"
)

// DiffText returns a line diff of a and b ("-" lines only in a, "+" lines
// only in b, two lines of context around each change), or "" when they are
// equal. server.ini files are small, so a plain LCS table is enough.
func DiffText(aName, bName string, a, b []byte) string {
	if bytes.Equal(a, b) {
		return ""
	}
	al, bl := splitLines(a), splitLines(b)
	n, m := len(al), len(bl)
	// lcs[i][j] = length of the LCS of al[i:] and bl[j:].
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if al[i] == bl[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		op   byte
		text string
	}
	var ops []line
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && al[i] == bl[j]:
			ops = append(ops, line{' ', al[i]})
			i++
			j++
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, line{'-', al[i]})
			i++
		default:
			ops = append(ops, line{'+', bl[j]})
			j++
		}
	}
	const ctx = 2
	keep := make([]bool, len(ops))
	for k, o := range ops {
		if o.op != ' ' {
			for x := max(0, k-ctx); x <= min(len(ops)-1, k+ctx); x++ {
				keep[x] = true
			}
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", aName, bName)
	skipped := false
	for k, o := range ops {
		if !keep[k] {
			skipped = true
			continue
		}
		if skipped {
			sb.WriteString("@@\n")
			skipped = false
		}
		sb.WriteByte(o.op)
		sb.WriteString(o.text)
		sb.WriteByte('\n')
	}
	return sb.String()
}

func splitLines(b []byte) []string {
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
