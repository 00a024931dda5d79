"""The emulator's internals: server, dispatch, clock, log, scripting, faults, wire formats."""
