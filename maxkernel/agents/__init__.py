"""ADK apps, one folder each (`adk web maxkernel/agents` lists them): thin roots over maxkernel.agentlib."""
