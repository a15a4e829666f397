// The file browser of a sandbox (GET files/list, GET/PUT/DELETE files)
// and the viewer of one file, shared with the chat's artifacts.

import {api, q, request} from './api.js';
import {busy, confirmButton, fmtBytes, fmtTime, h, showError, showNotice} from './dom.js';

const fileURL = (id, p) => `/v1/sandboxes/${encodeURIComponent(id)}/files${q({path: p})}`;

// maxView is the largest file shown inline; bigger ones are downloaded.
const maxView = 4 << 20;

const imageTypes = {png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp', svg: 'image/svg+xml', bmp: 'image/bmp', ico: 'image/x-icon', avif: 'image/avif'};

export function extOf(name) {
  const m = /\.([^./]+)$/.exec(name);
  return m ? m[1].toLowerCase() : '';
}

// kindOf sorts a file by its name: image, pdf, csv or other.
export function kindOf(name) {
  const ext = extOf(name);
  if (imageTypes[ext]) return 'image';
  if (ext === 'pdf') return 'pdf';
  if (ext === 'csv' || ext === 'tsv') return 'csv';
  return 'other';
}

const baseName = (p) => p.replace(/\/+$/, '').split('/').pop() || p;

async function fetchBlob(id, p, signal) {
  const resp = await request('GET', fileURL(id, p), {signal});
  return resp.blob();
}

// download saves a sandbox file through the browser.
export async function download(id, p) {
  try {
    const blob = await fetchBlob(id, p);
    const url = URL.createObjectURL(blob);
    const a = h('a', {href: url, download: baseName(p), hidden: true});
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  } catch (e) {
    showError(e, `Downloading ${p}`);
  }
}

// fileViewer shows a file: images as images, PDFs in a frame, CSV as a
// table, UTF-8 text as text; anything else is offered for download.
export async function fileViewer(id, p, signal, onLeave) {
  const blob = await fetchBlob(id, p, signal);
  const name = baseName(p);
  const kind = kindOf(name);
  const url = () => {
    const typed = kind === 'image' ? new Blob([blob], {type: imageTypes[extOf(name)]}) : kind === 'pdf' ? new Blob([blob], {type: 'application/pdf'}) : blob;
    const u = URL.createObjectURL(typed);
    if (onLeave) onLeave(() => URL.revokeObjectURL(u));
    return u;
  };
  if (kind === 'image') return h('img', {class: 'preview-image', src: url(), alt: `${name} (image from the sandbox)`});
  if (kind === 'pdf') return h('iframe', {class: 'preview-pdf', src: url(), title: `${name} (PDF)`});
  if (blob.size > maxView) return h('p', {class: 'muted'}, `${fmtBytes(blob.size)}: too large to show here; download it.`);
  const bytes = new Uint8Array(await blob.arrayBuffer());
  let text;
  try {
    text = new TextDecoder('utf-8', {fatal: true}).decode(bytes);
    if (text.includes('\0')) throw new Error('binary');
  } catch {
    return h('p', {class: 'muted'}, `A binary file of ${fmtBytes(blob.size)}; download it to open it.`);
  }
  if (kind === 'csv') return csvTable(text, extOf(name) === 'tsv' ? '\t' : ',');
  return h('pre', {class: 'preview-text'}, text);
}

// csvTable renders the first rows of a CSV (quoted fields included).
function csvTable(text, sep) {
  const rows = [];
  let row = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length && rows.length <= 200; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"';
        i++;
      } else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"' && field === '') quoted = true;
    else if (c === sep) {
      row.push(field);
      field = '';
    } else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') i++;
      row.push(field);
      rows.push(row);
      row = [];
      field = '';
    } else field += c;
  }
  if (field || row.length) rows.push([...row, field]);
  const [head, ...rest] = rows;
  return h('div', {class: 'table-wrap'}, h('table', {class: 'list csv'},
    head ? h('thead', {}, h('tr', {}, head.map((c) => h('th', {scope: 'col'}, c)))) : null,
    h('tbody', {}, rest.slice(0, 200).map((r) => h('tr', {}, r.map((c) => h('td', {}, c)))))));
}

export function filesPanel(ctx, sb) {
  const {signal} = ctx;
  const root = sb.root || '/workspace';
  let dir = root;
  const crumbs = h('nav', {class: 'crumbs', 'aria-label': 'Folder'});
  const tbody = h('tbody');
  const table = h('table', {class: 'list', id: 'files'},
    h('thead', {}, h('tr', {}, ['Name', 'Size', 'Modified', 'Actions'].map((t) => h('th', {scope: 'col'}, t)))), tbody);
  const empty = h('p', {class: 'muted', hidden: true}, 'This folder is empty.');
  const upload = h('input', {type: 'file', id: 'upload', multiple: true});
  const refresh = h('button', {type: 'button'}, 'Refresh');
  const folderName = h('input', {id: 'new-folder', placeholder: 'new-folder', autocomplete: 'off'});
  const mkdir = h('button', {type: 'submit'}, 'Make folder');
  const viewer = h('section', {class: 'card viewer', id: 'viewer', hidden: true, 'aria-live': 'polite'});
  const panel = h('div', {class: 'files-panel'},
    h('div', {class: 'toolbar'}, crumbs, refresh),
    h('div', {class: 'toolbar'},
      h('div', {class: 'field'}, h('label', {for: 'upload'}, 'Upload files to this folder'), upload),
      h('form', {class: 'inline', onsubmit: (e) => {
        e.preventDefault();
        const name = folderName.value.trim();
        if (!name) return;
        busy(mkdir, null, async () => {
          try {
            await api('POST', `/v1/sandboxes/${encodeURIComponent(sb.id)}/files/mkdir${q({path: join(dir, name)})}`);
            folderName.value = '';
            await list();
          } catch (err) {
            showError(err, `Making folder ${name}`);
          }
        });
      }}, h('label', {for: 'new-folder', class: 'sr-only'}, 'New folder name'), folderName, mkdir)),
    h('div', {class: 'table-wrap'}, table), empty, viewer);

  const join = (d, name) => (d.endsWith('/') ? d : d + '/') + name;

  const showCrumbs = () => {
    const parts = dir.split('/').filter(Boolean);
    const items = [h('button', {type: 'button', class: 'link', onclick: () => open('/')}, '/')];
    parts.forEach((part, i) => {
      const p = '/' + parts.slice(0, i + 1).join('/');
      if (i > 0) items.push(h('span', {class: 'sep', 'aria-hidden': 'true'}, '/'));
      items.push(i === parts.length - 1
        ? h('span', {'aria-current': 'location'}, part)
        : h('button', {type: 'button', class: 'link', onclick: () => open(p)}, part));
    });
    crumbs.replaceChildren(...items);
  };

  const open = (p) => {
    dir = p;
    viewer.hidden = true;
    list();
  };

  const view = async (f) => {
    viewer.hidden = false;
    const close = h('button', {type: 'button', 'aria-label': 'Close the file'}, 'Close');
    close.addEventListener('click', () => {
      viewer.hidden = true;
      viewer.replaceChildren();
    });
    const dl = h('button', {type: 'button'}, 'Download');
    dl.addEventListener('click', () => download(sb.id, f.path));
    const content = h('div', {class: 'viewer-body'}, h('p', {class: 'muted'}, 'Loading…'));
    viewer.replaceChildren(h('div', {class: 'title-row'}, h('h2', {id: 'viewer-title'}, f.path), h('span', {class: 'actions'}, dl, close)), content);
    try {
      content.replaceChildren(await fileViewer(sb.id, f.path, signal, ctx.onLeave));
    } catch (e) {
      if (e.name === 'AbortError') return;
      content.replaceChildren(h('p', {class: 'error-text'}, e.message));
      showError(e, `Opening ${f.path}`);
    }
    viewer.scrollIntoView({block: 'nearest'});
  };

  const row = (f) => {
    const isDir = f.type === 'dir';
    const name = isDir
      ? h('button', {type: 'button', class: 'link', onclick: () => open(f.path)}, `${f.name}/`)
      : h('button', {type: 'button', class: 'link', onclick: () => view(f)}, f.name);
    const actions = h('span', {class: 'actions'});
    if (!isDir) {
      actions.append(h('button', {type: 'button', 'aria-label': `Download ${f.name}`, onclick: () => download(sb.id, f.path)}, 'Download'));
    }
    actions.append(confirmButton('Delete', async () => {
      try {
        await api('DELETE', fileURL(sb.id, f.path));
        showNotice(`Deleted ${f.path}.`);
        if (!viewer.hidden && document.getElementById('viewer-title')?.textContent === f.path) viewer.hidden = true;
        await list();
      } catch (e) {
        showError(e, `Deleting ${f.path}`);
      }
    }, {class: 'danger', 'aria-label': `Delete ${f.name}`}));
    return h('tr', {'data-name': f.name},
      h('td', {}, name, f.type === 'symlink' ? h('span', {class: 'muted'}, ` → ${f.symlink_target}`) : null),
      h('td', {}, isDir ? '—' : fmtBytes(f.size)),
      h('td', {}, fmtTime(f.mod_time)),
      h('td', {}, actions));
  };

  async function list() {
    showCrumbs();
    try {
      const res = await api('GET', `/v1/sandboxes/${encodeURIComponent(sb.id)}/files/list${q({path: dir})}`, {signal});
      const files = res.files.sort((a, b) => (a.type === 'dir') === (b.type === 'dir') ? a.name.localeCompare(b.name) : a.type === 'dir' ? -1 : 1);
      tbody.replaceChildren(...files.map(row));
      if (dir !== '/') {
        const up = dir.replace(/\/[^/]+\/?$/, '') || '/';
        tbody.prepend(h('tr', {}, h('td', {colspan: 4}, h('button', {type: 'button', class: 'link', onclick: () => open(up)}, '.. (up a folder)'))));
      }
      empty.hidden = files.length > 0;
    } catch (e) {
      showError(e, `Listing ${dir}`);
    }
  }

  upload.addEventListener('change', async () => {
    const chosen = [...upload.files];
    for (const f of chosen) {
      try {
        await request('PUT', fileURL(sb.id, join(dir, f.name)), {body: f, headers: {'Content-Type': 'application/octet-stream'}});
        showNotice(`Uploaded ${f.name} (${fmtBytes(f.size)}).`);
      } catch (e) {
        showError(e, `Uploading ${f.name}`);
      }
    }
    upload.value = '';
    await list();
  });
  refresh.addEventListener('click', () => busy(refresh, null, list));
  list();
  return panel;
}
