"""The trusted core: sandboxed jobs (candidate, reference, compile, profile) and the verdict built from them."""
