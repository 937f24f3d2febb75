"""The kernel engineer's tools: typed plain functions (ADK FunctionTools as they are), usable from the CLI too."""
