# Sourced by scripts/demo.sh and scripts/ui.sh: what a folder is, so the scripts create, reuse and
# delete only the demo homes they made (each holds DEMO_MARKER) and never a user's home.
DEMO_MARKER=".made-by-inorder-demo"

# home_kind DIR: prints `missing`, `empty` (a folder with nothing in it), `demo` (made by scripts/demo.sh)
# or `user` (anything else: landing files, a source.json, a store... the user's)
home_kind() {
  if [ ! -e "$1" ]; then echo missing
  elif [ -f "$1/$DEMO_MARKER" ]; then echo demo
  elif [ -d "$1" ] && [ -z "$(ls -A "$1")" ]; then echo empty
  else echo user
  fi
}
