"""The harness's tests (mage, the command line, the book) and the shared test kit in support/."""
