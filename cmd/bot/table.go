package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"
)

// table is an operator command's output: columns that fit the terminal.
// Columns marked to shrink are cut, widest first, with "…", until a line
// fits; the others are kept whole. A column of thread IDs keeps their
// end, which tells them apart ("…1700000000.000100"). With width 0
// (--wide), nothing is cut.
type table struct {
	header  []string
	shrink  []bool // by column
	keepEnd []bool // by column: cut at the start
	rows    [][]string
}

func newTable(header ...string) *table {
	return &table{header: header, shrink: make([]bool, len(header)), keepEnd: make([]bool, len(header))}
}

// shrinks marks columns that may be cut to fit.
func (t *table) shrinks(cols ...int) *table {
	for _, c := range cols {
		t.shrink[c] = true
	}
	return t
}

// endShrinks marks columns that may be cut at their start to fit.
func (t *table) endShrinks(cols ...int) *table {
	for _, c := range cols {
		t.shrink[c], t.keepEnd[c] = true, true
	}
	return t
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// minCol is the narrowest a shrinking column gets.
const minCol = 4

// write prints the table in width columns (0: no limit).
func (t *table) write(w io.Writer, width int) error {
	widths := make([]int, len(t.header))
	for _, r := range append([][]string{t.header}, t.rows...) {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	const gap = 2
	total := gap * (len(widths) - 1)
	for _, w := range widths {
		total += w
	}
	for width > 0 && total > width {
		widest := -1
		for i, w := range widths {
			if t.shrink[i] && w > minCol && (widest < 0 || w > widths[widest]) {
				widest = i
			}
		}
		if widest < 0 {
			break // as narrow as it gets
		}
		widths[widest]--
		total--
	}
	var b strings.Builder
	for _, r := range append([][]string{t.header}, t.rows...) {
		b.Reset()
		for i, c := range r {
			c = cut(c, widths[i], t.keepEnd[i])
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+gap))
			}
		}
		if _, err := fmt.Fprintln(w, strings.TrimRight(b.String(), " ")); err != nil {
			return err
		}
	}
	return nil
}

// cut shortens s to n runes, marking the cut with "…": at its end, or
// with keepEnd at its start.
func cut(s string, n int, keepEnd bool) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if keepEnd {
		return "…" + string(r[len(r)-n+1:])
	}
	return string(r[:n-1]) + "…"
}

// termWidth is the width operator tables fit: $COLUMNS, else the
// terminal's, else 80.
func termWidth(getenv func(string) string) int {
	if n, err := strconv.Atoi(getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	if n := terminalColumns(os.Stdout); n > 0 {
		return n
	}
	return 80
}

// shortHash is a hash as tables show it: a prefix, as git does.
func shortHash(h string) string {
	const n = 8
	if len(h) > n {
		return h[:n]
	}
	return h
}
