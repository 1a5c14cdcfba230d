// esbuild bundles imported stylesheets into the CSS output.
declare module "*.css";
