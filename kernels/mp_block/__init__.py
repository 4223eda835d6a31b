"""mp_block (the message-passing layer): its spec, every implementation and its tests, in one folder."""
