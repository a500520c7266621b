from catalog.cli import main

raise SystemExit(main())
