"""Generated stubs of steward's client API (package steward.v1); regenerate with generate.sh."""
