from __future__ import annotations

from skiplock._cli.main import main

main()
