"""yue2-farm: the render farm around the stage engines — Ray actors, driver, album specs, artifact store, metrics,
dashboard and CLI. The only package where Ray, storage and the command line meet; imports stay light (torch and Ray
are imported by the modules that use them)."""

__version__ = "0.1.0"
