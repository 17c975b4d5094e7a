"""The gRPC edge: the externalgrpc servicer, its pure converters and the server."""
