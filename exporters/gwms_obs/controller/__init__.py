"""The monitoring controller: who may trace which pilots, where, at what verbosity (docs/controller.md)."""
