import { html, type Html } from '../console-html';
import { layout, type ViewContext } from './layout.view';

/**
 * The 401 page: the app's access check refused the visitor. It says where to sign in when the
 * app gave `loginUrl`, and otherwise what refused them and what to do about it, since the
 * console cannot know how the app signs people in.
 */
export function signInPage(ctx: ViewContext, loginUrl: string | null): Html {
  return layout(
    ctx,
    'Sign in to open the outbox console',
    loginUrl === null
      ? html`<p class="notice" role="alert" id="refused">
            This app's access check for the console (the guard or authorize callback it mounts the
            console with) refused this request.
          </p>
          <p id="sign-in-help">
            Sign in to the app the way your team set it up (a session, or a token in the
            Authorization header) and reload this page. To show a sign-in link here, the app gives
            the console its <code>loginUrl</code> option (see the console's documentation, Access).
          </p>`
      : html`<p class="notice" role="alert" id="refused">
            You are not signed in, or not allowed to open the outbox console.
          </p>
          <p><a id="login" class="button" href="${loginUrl}">Sign in</a></p>`,
  );
}
