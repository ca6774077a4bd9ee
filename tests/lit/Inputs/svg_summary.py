"""Parses an SVG with xml.etree (failing if it is not well-formed XML) and prints its structure,
one fact a line, for FileCheck: size, lanes, phases, steps, op boxes by kind, arrows, waits, and
anything that would reach outside the file (scripts, links, external fonts)."""
import sys
import xml.etree.ElementTree as ET

SVG = '{http://www.w3.org/2000/svg}'


def classes(root, tag, cls):
    return [e for e in root.iter(SVG + tag) if cls in e.get('class', '').split()]


root = ET.parse(sys.argv[1]).getroot()
print('root', root.tag.replace(SVG, 'svg:'), 'viewBox', root.get('viewBox'))
print('lanes', ' '.join(e.text for e in classes(root, 'text', 'l')))
print('phases', ' '.join(e.find(SVG + 'title').text for e in root.iter(SVG + 'g')
                         if e.find(SVG + 'line') is not None and e.find(SVG + 'line').get('class') == 'ph'))
print('steps', len(classes(root, 'text', 's')))
# The legend holds one box of each kind and one arrow of each kind.
print('reduce boxes', len(classes(root, 'rect', 'r')) - 1)
print('copy boxes', len(classes(root, 'rect', 'c')) - 1)
print('arrows', len(classes(root, 'line', 'a')) - 1)
print('waits', max(0, len(classes(root, 'line', 'w')) - 1))
outside = [e.tag for e in root.iter() if e.tag in (SVG + 'script', SVG + 'image', SVG + 'foreignObject')]
outside += [k for e in root.iter() for k in e.attrib if k.endswith('href')]
outside += [s for e in root.iter(SVG + 'style') for s in ('@import', '@font-face', 'http') if s in e.text]
print('outside references', len(outside))
