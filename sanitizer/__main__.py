import sys

from sanitizer.cli import main

sys.exit(main())
