"""Listener groups that own a whole feature (several Slack surfaces each). `register(app, deps)`."""
