//go:build !unix

package main

import "os"

// terminalColumns is 0: tables fit $COLUMNS, or 80.
func terminalColumns(*os.File) int { return 0 }
