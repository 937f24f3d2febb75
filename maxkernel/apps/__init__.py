"""ADK apps, one folder each (`adk web maxkernel/apps` lists them): thin roots over maxkernel.agents."""
