"""The shared test kit: helpers the tests of tests/ and kernels/<op>/tests/ import (never a test module)."""
