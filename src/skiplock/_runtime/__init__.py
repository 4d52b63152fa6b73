"""The worker's runtime: the claim loop, the slots jobs run in, the completer, and the services
beside them (heartbeat, listener, leader, maintenance, periodic ticks, supervisor).

:class:`skiplock.Worker` composes these; nothing here is public API.
"""
