"""gwms-obs: observability for the GlideinWMS pilot factory."""

__version__ = "0.1.0"
