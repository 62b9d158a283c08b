"""Managed bots: the node's supervisor and the bot programs it runs.

A managed bot is an ordinary client that the node happens to run: a child
process that connects back over the WebSocket with its own token, exactly as
an external bot would (DESIGN.md §3). No private back door.
"""
