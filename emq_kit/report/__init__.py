"""What a command leaves behind for people and CI: the one versioned JSON document every
command writes (``document``, specs/schemas/report.json) and the self-contained HTML
report (``html``)."""
