// The API keys part of the settings page: the team's keys (an admin may
// list every team's), a form that makes one and shows its secret once,
// and revocation. The server keeps only a hash of a key: its secret
// cannot be shown again, only its prefix.

import {api, getSession, q} from './api.js';
import {busy, confirmButton, fmtTime, h, showError, showNotice} from './dom.js';

export function keysSection(ctx) {
  const {signal} = ctx;
  const sess = getSession() || {};
  const name = h('input', {id: 'key-name', required: true, maxlength: 100, placeholder: 'laptop, CI…', autocomplete: 'off'});
  const format = h('select', {id: 'key-format'},
    h('option', {value: 'cove'}, 'cove_… (Cove CLI and API)'),
    h('option', {value: 'e2b'}, 'e2b_… (E2B SDKs)'));
  const create = h('button', {type: 'submit', class: 'primary', id: 'key-create'}, 'Create key');
  const form = h('form', {class: 'card row-form', 'aria-label': 'Create an API key'},
    h('div', {class: 'field'}, h('label', {for: 'key-name'}, 'Name'), name),
    h('div', {class: 'field'}, h('label', {for: 'key-format'}, 'Form'), format),
    h('div', {class: 'field end'}, create));
  const shown = h('div', {id: 'key-new', hidden: true});
  const all = h('input', {type: 'checkbox', id: 'keys-all'});
  const tbody = h('tbody', {id: 'keys'});
  const section = h('section', {'aria-labelledby': 'keys-title'},
    h('h2', {id: 'keys-title'}, 'API keys'),
    h('p', {class: 'muted'}, `Keys of team ${sess.team || ''} for the CLI, the API and E2B SDKs. A key’s secret is shown once, when it is made; revoking a key stops it at once.`),
    form, shown,
    sess.admin ? h('label', {class: 'check'}, all, ' Show every team’s keys (admin)') : null,
    h('div', {class: 'table-wrap'}, h('table', {class: 'list', 'aria-label': 'API keys'},
      h('thead', {}, h('tr', {}, ['Name', 'Key', 'Team', 'Created', 'Last used', 'Status', ''].map((x) => h('th', {scope: 'col'}, x)))),
      tbody)));

  const row = (k) => {
    const mine = k.prefix === sess.prefix;
    return h('tr', {'data-id': k.id},
      h('td', {}, k.name, mine ? h('span', {class: 'muted'}, ' (this session)') : null),
      h('td', {}, h('code', {}, `${k.prefix}…`)),
      h('td', {}, k.team),
      h('td', {}, fmtTime(k.created_at)),
      h('td', {}, k.last_used_at ? fmtTime(k.last_used_at) : 'never'),
      h('td', {}, k.revoked_at ? `revoked ${fmtTime(k.revoked_at)}` : (k.admin ? 'active · admin' : 'active')),
      h('td', {}, k.revoked_at ? '' : confirmButton('Revoke', async () => {
        try {
          await api('DELETE', `/v1/keys/${encodeURIComponent(k.id)}`, {signal});
          showNotice(`Revoked ${k.name} (${k.prefix}…).${mine ? ' It was this session’s key: sign in with another.' : ''}`);
          await load();
        } catch (e) {
          showError(e, `Revoking ${k.name}`);
        }
      }, {class: 'danger', 'aria-label': `Revoke ${k.name}`})));
  };
  const load = async () => {
    try {
      const list = await api('GET', `/v1/keys${q({all: all.checked ? 'true' : ''})}`, {signal});
      // Active keys first, newest first.
      const keys = list.keys.slice().sort((a, b) => (!!a.revoked_at - !!b.revoked_at) || b.created_at.localeCompare(a.created_at));
      tbody.replaceChildren(...keys.map(row));
    } catch (e) {
      showError(e, 'Listing API keys');
    }
  };
  all.addEventListener('change', load);
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    busy(create, 'Creating…', async () => {
      try {
        const k = await api('POST', '/v1/keys', {body: {name: name.value.trim(), format: format.value}, signal});
        name.value = '';
        showSecret(shown, k);
        await load();
      } catch (err) {
        showError(err, 'Creating an API key');
      }
    });
  });
  section.load = load;
  return section;
}

// showSecret shows a new key's secret, once: it is in no list and goes
// when the user says it is copied (or leaves the page).
function showSecret(box, k) {
  const secret = h('input', {id: 'key-secret', readonly: true, value: k.secret, 'aria-label': `Secret of ${k.name}`, spellcheck: 'false', class: 'mono'});
  const copy = h('button', {type: 'button', id: 'key-copy'}, 'Copy');
  copy.addEventListener('click', async () => {
    secret.select();
    try {
      await navigator.clipboard.writeText(k.secret);
    } catch {
      document.execCommand('copy');
    }
    copy.textContent = 'Copied';
  });
  const done = h('button', {type: 'button', id: 'key-done'}, 'Done: hide it');
  done.addEventListener('click', () => {
    box.replaceChildren();
    box.hidden = true;
  });
  box.replaceChildren(h('div', {class: 'card', role: 'status'},
    h('p', {}, h('strong', {}, `Key ${k.name} made. `), 'Copy its secret now: it is shown only this once.'),
    h('div', {class: 'row-form'}, secret, copy, done)));
  box.hidden = false;
  secret.focus();
  secret.select();
}
