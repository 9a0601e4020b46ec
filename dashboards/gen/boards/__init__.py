"""One module per dashboard; ``dashboards.py`` assembles them (BOARDS, the JSON, the question list)."""
