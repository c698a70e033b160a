// Package hooks holds no code: its test checks that the packages whose
// goroutines outlive their calls keep their test hooks per instance.
package hooks
