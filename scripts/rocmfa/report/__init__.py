"""The results page: nox -s report (probe JSON and team-index summaries -> one HTML page)."""
