"""``skiplock doctor``: checks of a live database, each giving one finding with what to do."""
