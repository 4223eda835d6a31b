"""``python -m mage.book``: check the data the build will show, before spending time on a build."""
import sys

from mage.book import _main

sys.exit(_main())
