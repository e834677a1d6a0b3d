//go:build !amd64

package cache

import "errors"

// fromCPUID has no CPUID to ask outside amd64.
func fromCPUID() (LLC, error) {
	return LLC{}, errors.New("CPUID is an x86 instruction")
}
