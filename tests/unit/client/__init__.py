"""etl.client on its own: the session, the wire, caps, limits and answers, with scripted peers or transports."""
