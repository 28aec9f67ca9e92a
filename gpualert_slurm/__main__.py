import sys

from gpualert_slurm.cli import main

sys.exit(main())
