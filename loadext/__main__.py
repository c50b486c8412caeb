from loadext.cli import main

raise SystemExit(main())
