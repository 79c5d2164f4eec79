#!/usr/bin/env python3
"""Checks that moving the README into docs/ lost no figure or claim (issue 26, item 5).

usage: scripts/check_docs_moved.py OLD_REV   (run from the repository root; OLD_REV is a
commit whose README.md and docs/pipeline-schedules.md were the long originals, e.g. cbf9d73)

From the old README.md and docs/pipeline-schedules.md it takes
  - every table row (a line starting with '|'),
  - every image (![...](path)), and
  - every word holding a digit outside code blocks, tables and headings, with the words
    before and after it in its paragraph (whitespace joined, so line breaks do not matter),
and reports each that README.md and docs/*.md (joined the same way) no longer hold. Table
rows and contexts are compared with backquotes and emphasis stripped; images by file name.
Exit status 1 when something is missing."""
import glob
import re
import subprocess
import sys


def norm(s):
    s = s.replace('**', '').replace('`', '')
    return ' '.join(s.split())


def paragraphs(text):
    """The text outside fenced blocks, tables and headings, as paragraphs of words (images
    left out: they are checked by file name)."""
    paras, cur, fence = [], [], False
    for line in text.split('\n') + ['']:
        if line.strip().startswith('```'):
            fence = not fence
            continue
        if fence or line.lstrip().startswith(('|', '#')) or not line.strip():
            if cur:
                paras.append(norm(re.sub(r'!\[[^\]]*\]\([^)]+\)', ' ', ' '.join(cur))).split(' '))
            cur = []
            continue
        cur.append(line)
    return paras


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rev = sys.argv[1]
    old = {p: subprocess.run(['git', 'show', f'{rev}:{p}'], capture_output=True, text=True, check=True).stdout
           for p in ['README.md', 'docs/pipeline-schedules.md']}
    new = open('README.md').read() + '\n' + '\n'.join(open(f).read() for f in sorted(glob.glob('docs/*.md')))
    new_n = norm(new)
    new_rows = set(norm(l) for l in new.split('\n') if l.lstrip().startswith('|'))
    new_images = set(m.split('/')[-1] for m in re.findall(r'!\[[^\]]*\]\(([^)]+)\)', new))
    missing, counts = [], {'rows': 0, 'images': 0, 'figures': 0}
    for path, text in old.items():
        for line in text.split('\n'):
            if line.lstrip().startswith('|') and re.search(r'\d', line):
                counts['rows'] += 1
                if norm(line) not in new_rows:
                    missing.append((path, 'row', line.strip()))
        for img in re.findall(r'!\[[^\]]*\]\(([^)]+)\)', text):
            counts['images'] += 1
            if img.split('/')[-1] not in new_images:
                missing.append((path, 'image', img))
        for words in paragraphs(text):
            for i, w in enumerate(words):
                if not re.search(r'\d', w):
                    continue
                ctx = ' '.join(words[max(0, i - 1):i + 2])
                counts['figures'] += 1
                if ctx not in new_n:
                    missing.append((path, 'figure', ctx))
    print(f"checked {counts['rows']} table rows with numbers, {counts['images']} images and "
          f"{counts['figures']} figures in prose (each with the words beside it)")
    for path, kind, what in missing:
        print(f'MISSING {path} {kind}: {what}')
    print(f'{len(missing)} missing')
    sys.exit(1 if missing else 0)


if __name__ == '__main__':
    main()
