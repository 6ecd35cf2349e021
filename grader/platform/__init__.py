"""What the grader runs on: settings, the device table, the backend (a GPU or the emulator), the compiler, the sandbox."""
from pathlib import Path

COURSE_ROOT = Path(__file__).resolve().parents[2]      # the folder holding grader/, solutions/ and labs/
